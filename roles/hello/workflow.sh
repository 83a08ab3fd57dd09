# The hello workflow: Airlock runs this as `/bin/sh /etc/airlock/workflow.sh` on the run's
# command side, as the instance's own uid, with the workspace as the working directory.
set -eu
echo "hello from Airlock: run ${AIRLOCK_RUN:-?}, role ${AIRLOCK_ROLE:-?}, instance ${AIRLOCK_INSTANCE:-?}"
echo "id: $(id)"
echo "kernel: $(uname -srm)"
cd "${AIRLOCK_WORKSPACE:-.}"
echo "hello from run ${AIRLOCK_RUN:-?}" > hello.txt
echo "workspace $(pwd):"
ls -l
cat hello.txt
echo "hello: done"
