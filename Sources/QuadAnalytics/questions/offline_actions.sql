-- title: Actions made offline and how long they waited to sync
-- app: Campus
-- chart: bar action actions offline
-- order: 8
-- Both apps. Queued actions as they reached the backend (action.synced), by action:
-- how many were made without signal, their share, and how long those
-- waited on the phone before the backend had them, in seconds.
SELECT action AS action,
       COUNT(*) AS actions,
       SUM(CASE WHEN synced_offline = 1 THEN 1 ELSE 0 END) AS offline,
       ROUND(100.0 * SUM(CASE WHEN synced_offline = 1 THEN 1 ELSE 0 END) / COUNT(*), 1) AS offline_percent,
       ROUND(AVG(CASE WHEN synced_offline = 1 THEN waited_ms END) / 1000.0, 1) AS avg_wait_s,
       ROUND(MAX(CASE WHEN synced_offline = 1 THEN waited_ms END) / 1000.0, 1) AS max_wait_s
FROM tel_events
WHERE name = 'action.synced' AND ts >= $1 AND ts < $2
GROUP BY action
ORDER BY action
