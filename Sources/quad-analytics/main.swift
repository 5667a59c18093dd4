import QuadAnalytics
import QuadRuntime

ServiceMain.run(Analytics.self)
