-- title: Sessions that ended inside the reservation flow (BQ11)
-- app: ParkWise
-- chart: bar day sessions ended_in_reservation
-- order: 14
-- Sessions by the day they started; one ended inside the reservation flow
-- when its session.ended or app.crash says flow reservation (the app found
-- the Reserve screen mark still set). Crashes are counted beside.
WITH sessions AS (
    SELECT session,
           MIN(day) AS day,
           MAX(CASE WHEN name IN ('session.ended', 'app.crash') AND flow = 'reservation' THEN 1 ELSE 0 END) AS in_flow,
           MAX(CASE WHEN name = 'app.crash' THEN 1 ELSE 0 END) AS crashed
    FROM tel_events
    WHERE name IN ('session.started', 'session.ended', 'app.crash') AND ts >= $1 AND ts < $2
    GROUP BY session
)
SELECT day AS day,
       COUNT(*) AS sessions,
       SUM(in_flow) AS ended_in_reservation,
       ROUND(100.0 * SUM(in_flow) / COUNT(*), 1) AS percent,
       SUM(crashed) AS crashes
FROM sessions
GROUP BY day
ORDER BY day
