import Foundation
import QuadFavorites
import QuadRuntime

exit(ServiceMain.run(Favorites.self))
