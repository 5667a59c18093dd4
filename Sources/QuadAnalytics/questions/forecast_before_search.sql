-- title: Drivers who checked the forecast before their first spot search of the day (BQ8)
-- app: ParkWise
-- chart: bar day driver_days planned
-- order: 12
-- A driver-day is planned when the driver opened the forecast before the
-- first spot search of that campus day. A driver is the signed-in user, or
-- the phone for a guest.
WITH firsts AS (
    SELECT driver, day, MIN(ts) AS first_search
    FROM tel_events
    WHERE name = 'spot.search' AND ts >= $1 AND ts < $2
    GROUP BY driver, day
), marked AS (
    SELECT f.day,
           CASE WHEN EXISTS (SELECT 1 FROM tel_events e
                             WHERE e.driver = f.driver AND e.day = f.day AND e.name = 'forecast.opened' AND e.ts < f.first_search)
                THEN 1 ELSE 0 END AS planned
    FROM firsts f
)
SELECT day AS day,
       COUNT(*) AS driver_days,
       SUM(planned) AS planned,
       ROUND(100.0 * SUM(planned) / COUNT(*), 1) AS percent
FROM marked
GROUP BY day
ORDER BY day
