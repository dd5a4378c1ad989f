#!/usr/bin/env bash
# make-certs.sh DIR HOST... makes the certificates of deploy/vm with openssl:
#
#   DIR/ca.pem, DIR/ca-key.pem      a certificate authority for the cluster
#   DIR/HOST.pem, DIR/HOST-key.pem  one NATS server per host name (for
#                                   clients and for routes between servers)
#   DIR/worker.pem, worker-key.pem  the NATS user CN=ackflow-worker,O=ackflow
#   DIR/operator.pem, ...           the NATS user CN=ackflow-operator,O=ackflow
#   DIR/admin.pem, ...              the NATS user CN=nats-admin,O=ackflow
#
# nats-server.conf maps a client certificate's subject to its user
# (verify_and_map). Keep ca-key.pem off the VMs. deploy/vmtest runs this
# script when openssl is installed and starts the cluster with what it makes.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 DIR HOST... (e.g. $0 tls vm1.example.internal vm2.example.internal vm3.example.internal)" >&2
  exit 2
fi
dir=$1
shift
mkdir -p "$dir"
cd "$dir"
umask 077

days=825
key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }

# sign NAME SUBJECT EXTENSIONS: NAME-key.pem and NAME.pem, signed by the CA.
sign() {
  local name=$1 subject=$2 ext=$3
  key "$name-key.pem"
  openssl req -new -key "$name-key.pem" -subj "$subject" -out "$name.csr"
  printf '%b' "$ext" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
    -days "$days" -sha256 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
  chmod 0644 "$name.pem"
}

if [ ! -f ca.pem ]; then
  key ca-key.pem
  openssl req -x509 -new -key ca-key.pem -sha256 -days 3650 \
    -subj "/O=ackflow/CN=ackflow NATS CA" -out ca.pem
  chmod 0644 ca.pem
fi

for host in "$@"; do
  # Servers present their certificate on routes too, as clients.
  sign "$host" "/O=ackflow/CN=$host" \
    "subjectAltName=DNS:$host\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
done
for user in worker:ackflow-worker operator:ackflow-operator admin:nats-admin; do
  sign "${user%%:*}" "/O=ackflow/CN=${user#*:}" \
    "keyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"
done
rm -f ca.srl
echo "certificates in $dir: ca.pem, $(printf '%s.pem ' "$@")worker.pem operator.pem admin.pem (and their -key.pem)"
