-- title: Drivers sent to nearby lots who parked there (BQ9)
-- app: ParkWise
-- chart: bar lot sent parked
-- order: 13
-- Each driver, nearby lot and day with a nearby.chosen counts once as sent;
-- it parked when the same driver confirmed a check-in at that lot
-- (checkin.done) later that day.
WITH sent AS (
    SELECT driver, lot, day, MIN(ts) AS chosen
    FROM tel_events
    WHERE name = 'nearby.chosen' AND ts >= $1 AND ts < $2
    GROUP BY driver, lot, day
), marked AS (
    SELECT s.lot,
           CASE WHEN EXISTS (SELECT 1 FROM tel_events e
                             WHERE e.driver = s.driver AND e.day = s.day AND e.name = 'checkin.done' AND e.lot = s.lot AND e.ts >= s.chosen)
                THEN 1 ELSE 0 END AS parked
    FROM sent s
)
SELECT lot AS lot,
       COUNT(*) AS sent,
       SUM(parked) AS parked,
       ROUND(100.0 * SUM(parked) / COUNT(*), 1) AS percent
FROM marked
GROUP BY lot
ORDER BY lot
