import Foundation
import QuadNotifications
import QuadRuntime

exit(ServiceMain.run(Notifications.self))
