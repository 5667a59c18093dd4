-- title: Where accessible and EV spots are free
-- app: ParkWise
-- number: BQ12
-- type: 2
-- owner: Felipe Sales (iOS: Accessible and EV spots)
-- chart: bar place accessible_free_percent ev_free_percent
-- Accessible and charging spots: for each level that has any, from the
-- free accessible and free EV spots every occupancy snapshot keeps, the
-- mean free of each kind and the share of snapshots with at least one of
-- that kind free. The driver sees it in the app to pick a level.
SELECT lot || ' ' || level AS place,
       COUNT(*) AS snapshots,
       ROUND(AVG(1.0 * free_accessible), 1) AS free_accessible,
       ROUND(AVG(1.0 * free_ev), 1) AS free_ev,
       ROUND(100.0 * SUM(CASE WHEN total_accessible > 0 AND free_accessible > 0 THEN 1 ELSE 0 END)
             / NULLIF(SUM(CASE WHEN total_accessible > 0 THEN 1 ELSE 0 END), 0), 1) AS accessible_free_percent,
       ROUND(100.0 * SUM(CASE WHEN total_ev > 0 AND free_ev > 0 THEN 1 ELSE 0 END)
             / NULLIF(SUM(CASE WHEN total_ev > 0 THEN 1 ELSE 0 END), 0), 1) AS ev_free_percent
FROM occupancy
WHERE at_ms >= $1 AND at_ms < $2 AND total_accessible + total_ev > 0
GROUP BY lot, level
ORDER BY lot, level
