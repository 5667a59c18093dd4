import QuadCatalog
import QuadRuntime

ServiceMain.run(Catalog.self)
