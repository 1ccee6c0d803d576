# redlockd image: the static binary and nothing else.
#
# The binary is built outside Docker (no image registry here, so no golang
# build stage); `make image-redlockd` runs:
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags='-s -w' \
#       -o bin/redlockd-linux-amd64 ./cmd/redlockd
#   docker build -t redlockd/redlockd:local .
# .dockerignore keeps the build context down to that one file.
#
# No CA certificates: redlockd only talks plain TCP to its Redis masters.
# The config file is expected at /etc/redlockd/redlockd.yaml (mount it, see
# docker-compose.yml); flags and REDLOCKD_* env override it.
FROM scratch
COPY bin/redlockd-linux-amd64 /redlockd
# Unprivileged (the conventional "nonroot" uid/gid); no /etc/passwd needed.
USER 65532:65532
EXPOSE 7070
ENTRYPOINT ["/redlockd"]
CMD ["serve", "--config", "/etc/redlockd/redlockd.yaml"]
