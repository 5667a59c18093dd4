-- title: Drivers sent to nearby lots who say they parked there
-- app: ParkWise
-- number: BQ9
-- type: 4
-- owner: Fabio Higuera (Android: No campus spots)
-- chart: bar lot sent answered parked
-- The campus is full and the app sends the driver to a nearby lot we are
-- not connected to. Each driver, nearby lot and day with a Navigate tap
-- (nearby.chosen) counts once as sent; after Navigate the app asks the
-- driver once whether they parked in that lot (nearby.confirmed): answered
-- counts those who replied later that day, parked those who said yes.
WITH sent AS (
    SELECT driver, lot, day, MIN(ts) AS chosen
    FROM tel_events
    WHERE name = 'nearby.chosen' AND ts >= $1 AND ts < $2
    GROUP BY driver, lot, day
), marked AS (
    SELECT s.lot,
           CASE WHEN EXISTS (SELECT 1 FROM tel_events e
                             WHERE e.driver = s.driver AND e.day = s.day AND e.name = 'nearby.confirmed' AND e.lot = s.lot AND e.ts >= s.chosen)
                THEN 1 ELSE 0 END AS answered,
           CASE WHEN EXISTS (SELECT 1 FROM tel_events e
                             WHERE e.driver = s.driver AND e.day = s.day AND e.name = 'nearby.confirmed' AND e.lot = s.lot AND e.ts >= s.chosen
                               AND e.parked = 1)
                THEN 1 ELSE 0 END AS parked
    FROM sent s
)
SELECT lot AS lot,
       COUNT(*) AS sent,
       SUM(answered) AS answered,
       SUM(parked) AS parked,
       ROUND(100.0 * SUM(parked) / COUNT(*), 1) AS percent
FROM marked
GROUP BY lot
ORDER BY lot
