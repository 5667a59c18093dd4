import Foundation
import QuadAccounts
import QuadRuntime

exit(ServiceMain.run(Accounts.self))
