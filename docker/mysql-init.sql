-- The user stream-osc runs as: copy, swap and read the binlog.
GRANT ALL PRIVILEGES ON *.* TO 'osc'@'%' WITH GRANT OPTION;
FLUSH PRIVILEGES;
