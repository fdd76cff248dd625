# Kafka Connect with the Debezium MySQL connector (MySQL 8 / Aurora MySQL 3).
FROM quay.io/debezium/connect:3.5.0.Final
