-- title: How full each level is, by hour
-- app: ParkWise
-- number: BQ2
-- type: 2
-- owner: Andrés Cáceres (Android: Level map)
-- chart: heat place hour occupied_percent
-- Sprint 2, the live map refreshed every 5 s: the mean share of spots
-- taken (all kinds) in the occupancy snapshots of each level, by campus
-- hour of the day. The driver sees it in the app to choose a level and a
-- time.
SELECT lot || ' ' || level AS place,
       hour AS hour,
       ROUND(AVG(100.0 * (total_regular + total_accessible + total_ev - free_regular - free_accessible - free_ev)
                 / NULLIF(total_regular + total_accessible + total_ev, 0)), 1) AS occupied_percent,
       COUNT(*) AS snapshots
FROM occupancy
WHERE at_ms >= $1 AND at_ms < $2
GROUP BY lot, level, hour
ORDER BY lot, level, hour
