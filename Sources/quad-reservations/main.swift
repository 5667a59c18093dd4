import QuadReservations
import QuadRuntime

ServiceMain.run(Reservations.self)
