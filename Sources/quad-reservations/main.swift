import Foundation
import QuadReservations
import QuadRuntime

exit(ServiceMain.run(Reservations.self))
