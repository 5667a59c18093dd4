-- title: How likely each lot is full, by hour
-- app: ParkWise
-- number: BQ10
-- type: 2
-- owner: Nicolas Bobadilla (iOS: Home, Parking map)
-- chart: heat lot hour full_percent
-- The forecast shown to the driver: for each lot and campus hour, the
-- share of the lot's occupancy snapshots (all its levels at one instant)
-- with under 10 percent of its spots free, and the mean share free. The
-- driver sees it in the app beside the forecast: at which hours a lot is
-- usually full.
WITH lots AS (
    SELECT lot, at_ms, MIN(hour) AS hour,
           SUM(free_regular + free_accessible + free_ev) AS free,
           SUM(total_regular + total_accessible + total_ev) AS total
    FROM occupancy
    WHERE at_ms >= $1 AND at_ms < $2
    GROUP BY lot, at_ms
)
SELECT lot AS lot,
       hour AS hour,
       COUNT(*) AS snapshots,
       ROUND(100.0 * SUM(CASE WHEN 10 * free < total THEN 1 ELSE 0 END) / COUNT(*), 1) AS full_percent,
       ROUND(AVG(100.0 * free / total), 1) AS free_percent
FROM lots
WHERE total > 0
GROUP BY lot, hour
ORDER BY lot, hour
