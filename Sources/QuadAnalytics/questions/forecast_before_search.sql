-- title: Days planned with the forecast before the first live map or spot search
-- app: ParkWise
-- number: BQ8
-- type: 3
-- owner: Andrés Cáceres (Android: Forecast)
-- chart: bar day driver_days planned
-- The forecast checked before leaving home. The app cannot know where the
-- driver is, so a driver-day is planned when the driver opened the
-- forecast (forecast.opened) or changed the arrival time on it
-- (arrival.changed) before the first live map (view.opened levels) or
-- spot search of that campus day; by_arrival counts the planned days with
-- an arrival-time change among them. A driver is the signed-in user, or
-- the phone for a guest.
WITH firsts AS (
    SELECT driver, day, MIN(ts) AS first_use
    FROM tel_events
    WHERE (name = 'spot.search' OR (name = 'view.opened' AND view = 'levels')) AND ts >= $1 AND ts < $2
    GROUP BY driver, day
), marked AS (
    SELECT f.day,
           CASE WHEN EXISTS (SELECT 1 FROM tel_events e
                             WHERE e.driver = f.driver AND e.day = f.day AND e.name IN ('forecast.opened', 'arrival.changed') AND e.ts < f.first_use)
                THEN 1 ELSE 0 END AS planned,
           CASE WHEN EXISTS (SELECT 1 FROM tel_events e
                             WHERE e.driver = f.driver AND e.day = f.day AND e.name = 'arrival.changed' AND e.ts < f.first_use)
                THEN 1 ELSE 0 END AS by_arrival
    FROM firsts f
)
SELECT day AS day,
       COUNT(*) AS driver_days,
       SUM(planned) AS planned,
       SUM(by_arrival) AS by_arrival,
       ROUND(100.0 * SUM(planned) / COUNT(*), 1) AS percent
FROM marked
GROUP BY day
ORDER BY day
