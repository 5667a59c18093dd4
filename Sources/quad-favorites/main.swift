import QuadFavorites
import QuadRuntime

ServiceMain.run(Favorites.self)
