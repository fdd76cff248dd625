-- The target server's account (the target of migrations to another server): make, fill, lock and swap the
-- new table, see who holds it; the same grants as the embedded stack's (stack/mariadb.py TARGET_PRIVILEGES).
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX, TRIGGER, CREATE TEMPORARY TABLES, LOCK TABLES, PROCESS
  ON *.* TO 'osc_target'@'%';
FLUSH PRIVILEGES;
