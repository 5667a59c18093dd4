-- title: Fee collected per week
-- app: UniTrade
-- chart: bar week fee
-- order: 6
-- Transaction fees of confirmed orders (a cancelled order gives its fee
-- back), by campus week starting on Monday, with the orders and sales behind them.
SELECT week AS week,
       COUNT(*) AS orders,
       ROUND(SUM(fee_cents) / 100.0, 2) AS fee,
       ROUND(SUM(total_cents) / 100.0, 2) AS sales
FROM orders
WHERE status IN ('confirmed', 'returned') AND confirmed_ms >= $1 AND confirmed_ms < $2
GROUP BY week
ORDER BY week
