import QuadNotifications
import QuadRuntime

ServiceMain.run(Notifications.self)
