# manifold's image: its one binary, static, and nothing else. The binary is built
# before the image, so that building the image pulls nothing (no Go image, no base):
#
#   make image    # CGO_ENABLED=0 go build -o bin/manifold-static, then buildah bud
#
# `docker build .` or `podman build .` after the same go build make the same image.
# deploy/kubernetes runs it: the Deployment and the DaemonSets give the subcommand.
FROM scratch
COPY bin/manifold-static /manifold
ENTRYPOINT ["/manifold"]
