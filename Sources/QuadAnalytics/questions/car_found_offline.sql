-- title: Find my car, and how often without signal
-- app: ParkWise
-- number: BQ5
-- type: 3
-- owner: Fabio Higuera (Android: Find my car)
-- chart: bar day opened without_signal
-- Sprint 2, Find my car: how often drivers opened Find my car each day,
-- how many of those opens had no signal (the car is on P2 or P3, where
-- the saved location is all there is), their share, and how many drivers.
SELECT day AS day,
       COUNT(*) AS opened,
       SUM(offline) AS without_signal,
       ROUND(100.0 * SUM(offline) / COUNT(*), 1) AS offline_percent,
       COUNT(DISTINCT driver) AS drivers
FROM tel_events
WHERE name = 'view.opened' AND view = 'car' AND ts >= $1 AND ts < $2
GROUP BY day
ORDER BY day
