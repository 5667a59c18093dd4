-- title: Time from hold to check-in
-- app: ParkWise
-- number: BQ4
-- type: 3
-- owner: Julián Bohórquez (iOS: Reserve spot)
-- chart: bar wait checkins
-- Sprint 2, reservation with countdown and check-in: holds that ended in a
-- check-in, by how long the driver took from the hold to the check-in
-- (whole seconds), with the mean of each band: whether the countdown is
-- long enough.
WITH waits AS (
    SELECT (checked_in_ms - held_ms) / 1000 AS seconds
    FROM holds
    WHERE checked_in_ms IS NOT NULL AND held_ms >= $1 AND held_ms < $2
)
SELECT CASE WHEN seconds < 60 THEN 'under 1 min'
            WHEN seconds < 180 THEN '1-3 min'
            WHEN seconds < 300 THEN '3-5 min'
            WHEN seconds < 600 THEN '5-10 min'
            ELSE '10 min or more' END AS wait,
       COUNT(*) AS checkins,
       ROUND(AVG(seconds), 1) AS avg_seconds
FROM waits
GROUP BY CASE WHEN seconds < 60 THEN 'under 1 min'
              WHEN seconds < 180 THEN '1-3 min'
              WHEN seconds < 300 THEN '3-5 min'
              WHEN seconds < 600 THEN '5-10 min'
              ELSE '10 min or more' END
ORDER BY MIN(seconds)
