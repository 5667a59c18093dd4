import QuadContract
import QuadRuntime
import QuadStore
import QuadWire

/// The demo catalog a new campus starts with: UniTrade's categories and
/// ShopEase's collections, a few hundred products made from templates in a
/// fixed order, so every fresh store holds the same catalog.
extension Catalog {
    struct Template {
        let name: String
        let type: String
        let category: String
        let collection: String
        let basePrice: Double
        let info: [String: String]
    }

    static let templates: [Template] = [
        Template(name: "iPhone 12", type: "Smartphone", category: "Tech", collection: "Phones", basePrice: 699, info: ["storage": "128GB", "memory": "4GB", "processor": "A14 Bionic"]),
        Template(name: "iPhone XS", type: "Smartphone", category: "Tech", collection: "Phones", basePrice: 399, info: ["storage": "64GB", "memory": "4GB", "processor": "A12 Bionic"]),
        Template(name: "Galaxy S21", type: "Smartphone", category: "Tech", collection: "Phones", basePrice: 549, info: ["storage": "128GB", "memory": "8GB", "processor": "Exynos 2100"]),
        Template(name: "Pixel 7", type: "Smartphone", category: "Tech", collection: "Phones", basePrice: 499, info: ["storage": "128GB", "memory": "8GB", "processor": "Tensor G2"]),
        Template(name: "MacBook Air M1", type: "Laptop", category: "Tech", collection: "Laptops", basePrice: 899, info: ["storage": "256GB", "memory": "8GB", "processor": "Apple M1"]),
        Template(name: "ThinkPad T14", type: "Laptop", category: "Tech", collection: "Laptops", basePrice: 749, info: ["storage": "512GB", "memory": "16GB", "processor": "Ryzen 7 PRO"]),
        Template(name: "Dell XPS 13", type: "Laptop", category: "Tech", collection: "Laptops", basePrice: 999, info: ["storage": "512GB", "memory": "16GB", "processor": "Core i7"]),
        Template(name: "iPad 9th gen", type: "Tablet", category: "Tech", collection: "Tablets", basePrice: 329, info: ["storage": "64GB", "processor": "A13 Bionic"]),
        Template(name: "Galaxy Tab S7", type: "Tablet", category: "Tech", collection: "Tablets", basePrice: 449, info: ["storage": "128GB", "memory": "6GB"]),
        Template(name: "USB-C Hub", type: "Accessory", category: "Tech", collection: "Accessories", basePrice: 29, info: [:]),
        Template(name: "Wireless Mouse", type: "Accessory", category: "Tech", collection: "Accessories", basePrice: 19, info: [:]),
        Template(name: "Noise Cancelling Headphones", type: "Headphones", category: "Tech", collection: "Audio", basePrice: 199, info: [:]),
        Template(name: "Bluetooth Speaker", type: "Speaker", category: "Tech", collection: "Audio", basePrice: 59, info: [:]),
        Template(name: "Calculus Textbook", type: "Book", category: "Study", collection: "Textbooks", basePrice: 45, info: [:]),
        Template(name: "Linear Algebra Notes", type: "Notes", category: "Study", collection: "Textbooks", basePrice: 8, info: [:]),
        Template(name: "Physics I Textbook", type: "Book", category: "Study", collection: "Textbooks", basePrice: 52, info: [:]),
        Template(name: "Organic Chemistry Guide", type: "Book", category: "Study", collection: "Textbooks", basePrice: 38, info: [:]),
        Template(name: "Graphing Calculator", type: "Calculator", category: "Study", collection: "Study Tools", basePrice: 89, info: ["processor": "TI-84"]),
        Template(name: "Scientific Calculator", type: "Calculator", category: "Study", collection: "Study Tools", basePrice: 18, info: [:]),
        Template(name: "Sketchbook A4", type: "Sketchbook", category: "Creative", collection: "Art Supplies", basePrice: 12, info: [:]),
        Template(name: "Watercolor Set", type: "Paint", category: "Creative", collection: "Art Supplies", basePrice: 24, info: [:]),
        Template(name: "Drawing Tablet", type: "Tablet", category: "Creative", collection: "Art Supplies", basePrice: 79, info: [:]),
        Template(name: "DSLR Camera", type: "Camera", category: "Creative", collection: "Cameras", basePrice: 420, info: ["storage": "SD card"]),
        Template(name: "Tripod", type: "Accessory", category: "Creative", collection: "Cameras", basePrice: 35, info: [:]),
        Template(name: "Lab Coat", type: "Clothing", category: "Lab", collection: "Lab Gear", basePrice: 25, info: [:]),
        Template(name: "Safety Goggles", type: "Safety", category: "Lab", collection: "Lab Gear", basePrice: 9, info: [:]),
        Template(name: "Dissection Kit", type: "Kit", category: "Lab", collection: "Lab Gear", basePrice: 32, info: [:]),
        Template(name: "Arduino Starter Kit", type: "Electronics Kit", category: "Lab", collection: "Lab Gear", basePrice: 55, info: ["processor": "ATmega328P"]),
        Template(name: "Desk Lamp", type: "Lamp", category: "Personal", collection: "Dorm", basePrice: 22, info: [:]),
        Template(name: "Mini Fridge", type: "Appliance", category: "Personal", collection: "Dorm", basePrice: 120, info: [:]),
        Template(name: "Backpack", type: "Bag", category: "Personal", collection: "Dorm", basePrice: 40, info: [:]),
        Template(name: "Bicycle", type: "Bike", category: "Others", collection: "Transport", basePrice: 150, info: [:]),
        Template(name: "Electric Scooter", type: "Scooter", category: "Others", collection: "Transport", basePrice: 280, info: [:]),
        Template(name: "Concert Ticket", type: "Ticket", category: "Others", collection: "Tickets", basePrice: 30, info: [:]),
    ]

    static let colors = ["Black", "Silver", "White", "Blue", "Red", "Green", "Gold", "Gray"]
    static let conditions = ["New", "Like new", "Good", "Used"]

    /// Number of products in the demo catalog.
    public static let seedCount = 306

    /// The demo catalog, deterministic.
    static func seedProducts() -> [[SQLValue]] {
        (0..<seedCount).map { n in
            let t = templates[n % templates.count]
            let variant = n / templates.count
            let color = colors[(n * 7 + variant) % colors.count]
            let condition = conditions[(n * 3 + variant) % conditions.count]
            var info = t.info.mapValues { JSON.string($0) }
            info["color"] = .string(color)
            info["type"] = .string(condition)
            let factor = [1.0, 0.85, 0.7, 0.55][(n * 3 + variant) % 4]
            let price = (t.basePrice * factor * 100).rounded() / 100
            let id = "p-" + String(repeating: "0", count: max(0, 4 - String(n + 1).count)) + String(n + 1)
            let name = variant == 0 ? t.name : "\(t.name) (\(color), \(condition))"
            let stock = Int64((n * 37 + 11) % 9)  // 0...8: a few sold out
            let infoJSON = JSON.object(info)
            let search = [name, t.type, t.category, t.collection, info.values.compactMap(\.string).joined(separator: " ")].joined(separator: " ").lowercased()
            return [.text(id), .text(name), .double(price), .text("USD"), .text(infoJSON.text), .text(t.type),
                    .text(seededImagePath(t.collection)), .text(t.category), .text(t.collection), .int(stock), .text(search)]
        }
    }

    /// Seeds the demo catalog into an empty store, with one
    /// `catalog.product.changed` event per product so projections of other
    /// services can be built from the events alone. Workers starting
    /// together serialize on the write lock; the second finds it seeded.
    public static func seedIfEmpty(_ db: Database) throws {
        try db.transaction {
            try seedImages(db)
            guard (try db.queryOne("SELECT COUNT(*) AS n FROM products")?.int("n") ?? 0) == 0 else { return }
            // Listed when the campus began: older than every student's listing.
            let listed = SQLValue.int(Int64(Clock.nowMillis()))
            for values in seedProducts() {
                try db.execute("""
                    INSERT INTO products (id, name, price_value, currency, info, type, image_url, category, collection, stock, search, listed_ms)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                    """, values + [listed])
                let row = Row(columns: ["id", "name", "price_value", "currency", "info", "type", "image_url", "category", "collection", "stock", "listed_ms"],
                              values: Array(values.prefix(10)) + [listed])
                try Outbox.append(db, type: Contract.Catalog.productChanged.type, body: product(row).json)
            }
        }
    }
}
