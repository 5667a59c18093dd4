import QuadAccounts
import QuadRuntime

ServiceMain.run(Accounts.self)
