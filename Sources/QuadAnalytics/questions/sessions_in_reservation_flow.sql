-- title: Sessions that crashed inside the reservation flow
-- app: ParkWise
-- number: BQ11
-- type: 1
-- owner: Julián Bohórquez (iOS: Reserve spot)
-- chart: bar day reserve_sessions crashed_in_reservation
-- No crash service: the Reserve screen sets a mark when it opens
-- (mark.set) and clears it when it closes or the app goes to the
-- background (mark.cleared). When the app opens and finds the mark still
-- set, the last session ended inside the reservation flow without closing
-- normally: its app.crash says flow reservation. Sessions by the day they
-- started: those that opened the Reserve screen, those that crashed in
-- it, their share, and all crashes beside.
WITH sessions AS (
    SELECT session,
           MIN(day) AS day,
           MAX(CASE WHEN name = 'mark.set' AND flow = 'reservation' THEN 1 ELSE 0 END) AS reserved,
           MAX(CASE WHEN name = 'app.crash' AND flow = 'reservation' THEN 1 ELSE 0 END) AS in_flow,
           MAX(CASE WHEN name = 'app.crash' THEN 1 ELSE 0 END) AS crashed
    FROM tel_events
    WHERE name IN ('session.started', 'mark.set', 'app.crash') AND ts >= $1 AND ts < $2
    GROUP BY session
)
SELECT day AS day,
       COUNT(*) AS sessions,
       SUM(reserved) AS reserve_sessions,
       SUM(in_flow) AS crashed_in_reservation,
       ROUND(100.0 * SUM(in_flow) / NULLIF(SUM(reserved), 0), 1) AS percent,
       SUM(crashed) AS crashes
FROM sessions
GROUP BY day
ORDER BY day
