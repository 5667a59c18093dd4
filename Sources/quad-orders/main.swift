import Foundation
import QuadOrders
import QuadRuntime

exit(ServiceMain.run(Orders.self))
