-- title: The level to recommend, by lot and hour
-- app: ParkWise
-- number: BQ6
-- type: 2
-- owner: Felipe Sales (iOS: Find spot)
-- chart: bar slot free_spots
-- Sprint 2, forecast and recommended level: for each lot and campus hour,
-- the level with the most free spots on average in the occupancy
-- snapshots (all kinds of spot), and that mean. The driver sees it in the
-- app as the level to head for at the hour they arrive.
WITH levels AS (
    SELECT lot, level, hour, AVG(free_regular + free_accessible + free_ev) AS free
    FROM occupancy
    WHERE at_ms >= $1 AND at_ms < $2
    GROUP BY lot, level, hour
), ranked AS (
    SELECT lot, level, hour, free,
           ROW_NUMBER() OVER (PARTITION BY lot, hour ORDER BY free DESC, level) AS k
    FROM levels
)
SELECT lot || ' ' || CASE WHEN hour < 10 THEN '0' ELSE '' END || CAST(hour AS TEXT) || ':00' AS slot,
       lot AS lot,
       hour AS hour,
       level AS level,
       ROUND(free, 1) AS free_spots
FROM ranked
WHERE k = 1
ORDER BY lot, hour
