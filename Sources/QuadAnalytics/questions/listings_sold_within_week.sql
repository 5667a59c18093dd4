-- title: Listings that sell within 7 days, by category
-- app: UniTrade
-- chart: bar category listed sold_in_week
-- order: 7
-- Students' listings created in the period, by category: how many sold or
-- rented a first unit at most 7 days (168 h) after being listed, the share,
-- how many were withdrawn or taken down before any sale, and the median
-- hours from listing to the first sale of those that sold (at any time).
-- A sale is a confirmed order holding the listing that was not cancelled
-- (a returned rental counts); when the first was cancelled the next one is
-- the first sale. A listing still in its first week and not sold yet counts
-- as not sold.
WITH listed AS (
    SELECT l.category AS category, l.created_ms AS created_ms, l.closed_ms AS closed_ms,
           (SELECT MIN(o.confirmed_ms) FROM order_items i JOIN orders o ON o.id = i.order_id
            WHERE i.product = l.id AND o.status IN ('confirmed', 'returned') AND o.confirmed_ms IS NOT NULL) AS first_ms
    FROM listings l
    WHERE l.created_ms >= $1 AND l.created_ms < $2
), timed AS (
    SELECT category, closed_ms, first_ms,
           CASE WHEN first_ms IS NULL THEN NULL WHEN first_ms < created_ms THEN 0 ELSE first_ms - created_ms END AS wait_ms
    FROM listed
), ranked AS (
    SELECT category, wait_ms,
           ROW_NUMBER() OVER (PARTITION BY category ORDER BY wait_ms) AS k,
           COUNT(*) OVER (PARTITION BY category) AS n
    FROM timed
    WHERE wait_ms IS NOT NULL
), medians AS (
    SELECT category, ROUND(AVG(wait_ms) / 3600000.0, 1) AS hours
    FROM ranked
    WHERE k = (n + 1) / 2 OR k = (n + 2) / 2
    GROUP BY category
)
SELECT t.category AS category,
       COUNT(*) AS listed,
       SUM(CASE WHEN t.wait_ms <= 604800000 THEN 1 ELSE 0 END) AS sold_in_week,
       ROUND(100.0 * SUM(CASE WHEN t.wait_ms <= 604800000 THEN 1 ELSE 0 END) / COUNT(*), 1) AS sold_percent,
       SUM(CASE WHEN t.closed_ms IS NOT NULL AND (t.first_ms IS NULL OR t.closed_ms < t.first_ms) THEN 1 ELSE 0 END) AS closed_unsold,
       MAX(m.hours) AS median_hours
FROM timed t LEFT JOIN medians m ON m.category = t.category
GROUP BY t.category
ORDER BY t.category
