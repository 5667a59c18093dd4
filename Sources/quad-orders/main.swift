import QuadOrders
import QuadRuntime

ServiceMain.run(Orders.self)
