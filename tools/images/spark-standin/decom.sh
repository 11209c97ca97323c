#!/usr/bin/env bash
# Spark's executor decommissioning hook (preStop), as the official Spark image has it: signal the
# JVM with SIGPWR and wait up to a minute for it to leave.
set -ex
echo "Asked to decommission"
date | tee -a ${LOG}
WORKER_PID=$(ps -o pid -C java | tail -n 1 | awk '{ sub(/^[ \t]+/, ""); print }')
echo "Using worker pid $WORKER_PID"
kill -s SIGPWR ${WORKER_PID}
timeout 60 tail --pid=${WORKER_PID} -f /dev/null
date
echo "Done"
date
sleep 1
