-- title: Demand for accessible and EV spots against supply
-- app: ParkWise
-- number: BQ3
-- type: 4
-- owner: Rodrigo García (Android: Find a spot)
-- chart: bar kind spots holds
-- Sprint 2, Find a spot with its filters (regular, accessible, EV): by
-- kind of spot, the supply (spots in the latest snapshot of each level),
-- the demand (holds taken of that kind), holds per spot, and the share of
-- level snapshots with none of that kind free: whether the campus has
-- enough special spots.
WITH snaps AS (
    SELECT * FROM occupancy WHERE at_ms >= $1 AND at_ms < $2
), latest AS (
    SELECT s.* FROM snaps s WHERE s.at_ms = (SELECT MAX(x.at_ms) FROM snaps x WHERE x.level_id = s.level_id)
), kinds AS (
    SELECT 'regular' AS kind, 1 AS k,
           (SELECT COALESCE(SUM(total_regular), 0) FROM latest) AS spots,
           (SELECT COUNT(*) FROM snaps WHERE total_regular > 0) AS observed,
           (SELECT COUNT(*) FROM snaps WHERE total_regular > 0 AND free_regular = 0) AS full_snaps
    UNION ALL
    SELECT 'accessible', 2,
           (SELECT COALESCE(SUM(total_accessible), 0) FROM latest),
           (SELECT COUNT(*) FROM snaps WHERE total_accessible > 0),
           (SELECT COUNT(*) FROM snaps WHERE total_accessible > 0 AND free_accessible = 0)
    UNION ALL
    SELECT 'ev', 3,
           (SELECT COALESCE(SUM(total_ev), 0) FROM latest),
           (SELECT COUNT(*) FROM snaps WHERE total_ev > 0),
           (SELECT COUNT(*) FROM snaps WHERE total_ev > 0 AND free_ev = 0)
), demand AS (
    SELECT kinds.kind, kinds.k, kinds.spots, kinds.observed, kinds.full_snaps,
           (SELECT COUNT(*) FROM holds h WHERE h.kind = kinds.kind AND h.held_ms >= $1 AND h.held_ms < $2) AS holds
    FROM kinds
)
SELECT kind AS kind,
       spots AS spots,
       holds AS holds,
       ROUND(1.0 * holds / NULLIF(spots, 0), 2) AS holds_per_spot,
       ROUND(100.0 * full_snaps / NULLIF(observed, 0), 1) AS full_percent
FROM demand
ORDER BY k
