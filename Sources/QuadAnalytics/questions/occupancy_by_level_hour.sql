-- title: Occupancy by level and hour
-- app: ParkWise
-- chart: heat place hour occupied_percent
-- order: 10
-- Mean share of spots taken (all kinds) in the occupancy snapshots of each
-- level, by campus hour of the day.
SELECT lot || ' ' || level AS place,
       hour AS hour,
       ROUND(AVG(100.0 * (total_regular + total_accessible + total_ev - free_regular - free_accessible - free_ev)
                 / NULLIF(total_regular + total_accessible + total_ev, 0)), 1) AS occupied_percent,
       COUNT(*) AS snapshots
FROM occupancy
WHERE at_ms >= $1 AND at_ms < $2
GROUP BY lot, level, hour
ORDER BY lot, level, hour
