-- title: Where students buy: home or favorites screen
-- app: UniTrade
-- number: UQ1
-- type: 3
-- owner: UniTrade team (Swift and Flutter: Buy Now, from Home and Favorites)
-- chart: bar screen purchases
-- order: 1
-- Confirmed orders (cancelled and rejected ones left out) by the screen the
-- student placed them from, with each screen's share of all purchases.
-- Sprint 4: which screen leads to a purchase tells the team where the
-- For You and Favorites work pays.
SELECT screen AS screen,
       COUNT(*) AS purchases,
       ROUND(100.0 * COUNT(*) / (SELECT COUNT(*) FROM orders
                                 WHERE status IN ('confirmed', 'returned') AND confirmed_ms >= $1 AND confirmed_ms < $2), 1) AS percent
FROM orders
WHERE status IN ('confirmed', 'returned') AND confirmed_ms >= $1 AND confirmed_ms < $2
GROUP BY screen
ORDER BY purchases DESC, screen
