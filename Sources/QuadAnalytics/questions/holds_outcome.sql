-- title: Holds expired against holds fulfilled
-- app: ParkWise
-- number: BQ7
-- type: 3
-- owner: Rodrigo García (Android: Reserve)
-- chart: bar lot fulfilled expired cancelled
-- The reservation flow on Android: holds taken in the period by lot,
-- fulfilled (the driver checked in before the countdown ended), expired,
-- cancelled, still held, and the share of finished holds that expired.
SELECT lot AS lot,
       COUNT(*) AS holds,
       SUM(CASE WHEN checked_in_ms IS NOT NULL THEN 1 ELSE 0 END) AS fulfilled,
       SUM(CASE WHEN status = 'expired' THEN 1 ELSE 0 END) AS expired,
       SUM(CASE WHEN status = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
       SUM(CASE WHEN status = 'held' THEN 1 ELSE 0 END) AS pending,
       ROUND(100.0 * SUM(CASE WHEN status = 'expired' THEN 1 ELSE 0 END)
             / NULLIF(SUM(CASE WHEN checked_in_ms IS NOT NULL OR status = 'expired' THEN 1 ELSE 0 END), 0), 1) AS expired_percent
FROM holds
WHERE held_ms >= $1 AND held_ms < $2
GROUP BY lot
ORDER BY lot
