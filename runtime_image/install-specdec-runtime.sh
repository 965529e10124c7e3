#!/bin/sh
# Installs specdec-runtime (from /opt/specdec/src) into its own virtualenv, so its dependencies never
# change TensorRT-LLM's, and links the entrypoint. Both runtime images (one per route) run this.
set -eu
python3 -m venv --without-pip /opt/specdec/venv
python3 -m pip --python /opt/specdec/venv/bin/python install --no-cache-dir \
    --constraint /opt/specdec/src/constraints.txt "/opt/specdec/src[runtime]"
ln -s /opt/specdec/venv/bin/specdec-runtime /usr/local/bin/specdec-runtime
rm -rf /opt/specdec/src
specdec-runtime --help >/dev/null
# Non-root (uid 1000, the uid the operator's pods run as). Ubuntu-based images may already have a user
# with that uid; create one only when they do not.
id -u 1000 >/dev/null 2>&1 || useradd --uid 1000 --user-group --no-create-home --home-dir /tmp specdec
# No password, and not a locked account ('!'): the workers of a multi-node group let the leader's mpirun log in
# as this user with the deployment's SSH key, and sshd refuses a locked account.
usermod --password '*' "$(id -nu 1000)"
