import Foundation
import QuadCatalog
import QuadRuntime

exit(ServiceMain.run(Catalog.self))
