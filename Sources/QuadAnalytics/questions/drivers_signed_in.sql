-- title: Drivers signed in and drivers as guests, by day
-- app: ParkWise
-- number: BQ1
-- type: 3
-- owner: Nicolas Bobadilla (iOS: Login, Register)
-- chart: bar day signed_in guests
-- Sprint 2, login and register: drivers who opened a parking view that
-- day (the lots, the live map, the forecast, Find a spot, nearby lots, the
-- Reserve screen, Find my car, the drivers' answers), signed in with their
-- account or as guests (iOS lets a guest look without an account), and
-- the guests' share. A driver is the signed-in user, or the phone for a guest.
WITH used AS (
    SELECT driver, day, MAX(CASE WHEN user_id IS NULL THEN 0 ELSE 1 END) AS signed
    FROM tel_events
    WHERE name = 'view.opened' AND view IN ('parking', 'levels', 'forecast', 'spots', 'nearby', 'reservation', 'car', 'insights')
      AND ts >= $1 AND ts < $2
    GROUP BY driver, day
)
SELECT day AS day,
       COUNT(*) AS drivers,
       SUM(signed) AS signed_in,
       COUNT(*) - SUM(signed) AS guests,
       ROUND(100.0 * (COUNT(*) - SUM(signed)) / COUNT(*), 1) AS guest_percent
FROM used
GROUP BY day
ORDER BY day
