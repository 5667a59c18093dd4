-- title: Buy against rent by category
-- app: UniTrade
-- chart: bar category bought rented
-- order: 3
-- Units in confirmed orders by category, bought or rented, and the share rented.
SELECT i.category AS category,
       SUM(CASE WHEN o.mode = 'buy' THEN i.quantity ELSE 0 END) AS bought,
       SUM(CASE WHEN o.mode = 'rent' THEN i.quantity ELSE 0 END) AS rented,
       ROUND(100.0 * SUM(CASE WHEN o.mode = 'rent' THEN i.quantity ELSE 0 END) / NULLIF(SUM(i.quantity), 0), 1) AS rent_percent
FROM order_items i JOIN orders o ON o.id = i.order_id
WHERE o.status IN ('confirmed', 'returned') AND o.confirmed_ms >= $1 AND o.confirmed_ms < $2
GROUP BY i.category
ORDER BY i.category
