-- title: Carts abandoned
-- app: UniTrade
-- chart: bar day carts abandoned
-- order: 5
-- From telemetry: sessions that opened the cart view and have ended
-- (session.ended or app.crash), by the day the cart was opened; a cart is
-- abandoned when no purchase.made followed it in that session. Orders keep
-- no cart events, so the phone's own record is the source.
WITH carts AS (
    SELECT session, MIN(day) AS day, MIN(ts) AS opened
    FROM tel_events
    WHERE name = 'view.opened' AND view = 'cart' AND ts >= $1 AND ts < $2
    GROUP BY session
), ended AS (
    SELECT c.day,
           CASE WHEN EXISTS (SELECT 1 FROM tel_events e WHERE e.session = c.session AND e.name = 'purchase.made' AND e.ts >= c.opened)
                THEN 0 ELSE 1 END AS abandoned
    FROM carts c
    WHERE EXISTS (SELECT 1 FROM tel_events e WHERE e.session = c.session AND e.name IN ('session.ended', 'app.crash'))
)
SELECT day AS day,
       COUNT(*) AS carts,
       SUM(abandoned) AS abandoned,
       ROUND(100.0 * SUM(abandoned) / COUNT(*), 1) AS percent
FROM ended
GROUP BY day
ORDER BY day
