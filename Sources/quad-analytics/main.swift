import Foundation
import QuadAnalytics
import QuadRuntime

exit(ServiceMain.run(Analytics.self))
