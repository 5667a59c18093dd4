-- title: Favorites that turn into purchases
-- app: UniTrade
-- chart: bar category favorited purchased
-- order: 4
-- Products saved as favorites in the period (one per student and product),
-- by category, and how many the same student then bought in a confirmed
-- order placed after saving it.
WITH saved AS (
    SELECT COALESCE(p.category, 'Unknown') AS category,
           CASE WHEN EXISTS (
               SELECT 1 FROM orders o JOIN order_items i ON i.order_id = o.id
               WHERE o.user_id = f.user_id AND i.product = f.product
                 AND o.status IN ('confirmed', 'returned') AND o.confirmed_ms >= f.added_ms
           ) THEN 1 ELSE 0 END AS bought
    FROM favorites f LEFT JOIN products p ON p.id = f.product
    WHERE f.added_ms >= $1 AND f.added_ms < $2
)
SELECT category AS category,
       COUNT(*) AS favorited,
       SUM(bought) AS purchased,
       ROUND(100.0 * SUM(bought) / COUNT(*), 1) AS percent
FROM saved
GROUP BY category
ORDER BY category
