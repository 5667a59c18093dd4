-- title: Purchases by semester
-- app: UniTrade
-- number: UQ2
-- type: 4
-- owner: UniTrade team (Swift and Flutter: Buy Now, with the buyer's semester)
-- chart: bar semester purchases students
-- order: 2
-- Confirmed orders by the buyer's semester (as the order recorded it, else
-- as accounts last said), with how many students bought and the units
-- they took. A null semester is a buyer whose semester is not known.
-- Sprint 4: knowing which semester buys most targets the ads shown.
WITH bought AS (
    SELECT o.user_id,
           COALESCE(o.semester, u.semester) AS semester,
           (SELECT COALESCE(SUM(i.quantity), 0) FROM order_items i WHERE i.order_id = o.id) AS units
    FROM orders o LEFT JOIN users u ON u.id = o.user_id
    WHERE o.status IN ('confirmed', 'returned') AND o.confirmed_ms >= $1 AND o.confirmed_ms < $2
)
SELECT semester AS semester,
       COUNT(*) AS purchases,
       COUNT(DISTINCT user_id) AS students,
       SUM(units) AS units
FROM bought
GROUP BY semester
ORDER BY CASE WHEN semester IS NULL THEN 1 ELSE 0 END, semester
