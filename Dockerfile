# syntax=docker/dockerfile:1
# Meridian container images: meridian-agent (the chart's image) and
# meridian-hub, static binaries on distroless, running as a non-root user.
#
#   make image                      # both images, tag = the chart's appVersion
#   docker build --target agent -t ghcr.io/meridian-gpu/meridian-agent:0.1.0 .
#   docker build --target hub   -t ghcr.io/meridian-gpu/meridian-hub:0.1.0 .
#
# Builds with docker, podman or buildah. The base images are arguments so
# that a mirror can stand in for them.
ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Modules first: this layer is reused while go.mod and go.sum do not change.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Static binaries (no cgo): distroless/static has no C library.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/ ./cmd/meridian-agent ./cmd/meridian-hub && \
    mkdir -p /out/data

# The agent: the chart runs it as "meridian-agent" (found on PATH) with
# runAsUser 65532, the distroless nonroot user.
FROM ${BASE_IMAGE} AS agent
ARG VERSION=dev
LABEL org.opencontainers.image.title="meridian-agent" \
      org.opencontainers.image.description="Meridian spoke agent: connects one cluster to the Meridian hub over NATS" \
      org.opencontainers.image.source="https://github.com/meridian-gpu/meridian" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/meridian-agent /usr/local/bin/meridian-agent
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/meridian-agent"]

# The hub: embedded etcd and NATS data go to /data unless --etcd-endpoints
# and --nats-url point elsewhere; mount a volume there.
FROM ${BASE_IMAGE} AS hub
ARG VERSION=dev
LABEL org.opencontainers.image.title="meridian-hub" \
      org.opencontainers.image.description="Meridian hub: API, leader election and scheduling loop" \
      org.opencontainers.image.source="https://github.com/meridian-gpu/meridian" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/meridian-hub /usr/local/bin/meridian-hub
# distroless has no shell to mkdir with: copy an empty directory the
# nonroot user owns.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# In a container the APIs must be reachable from outside it. The embedded
# NATS stays on loopback: agents need an external NATS (--nats-url).
# Beyond loopback the hub refuses to serve without TLS: mount a certificate
# and set MERIDIAN_TLS_CERT and MERIDIAN_TLS_KEY (docs/security.md), or,
# behind a proxy that terminates TLS,
# MERIDIAN_INSECURE_ALLOW_PLAINTEXT_NON_LOOPBACK=true.
ENV MERIDIAN_HUB_DATA_DIR=/data \
    MERIDIAN_GRPC_ADDR=0.0.0.0:7070 \
    MERIDIAN_HTTP_ADDR=0.0.0.0:8080
EXPOSE 7070 8080
ENTRYPOINT ["/usr/local/bin/meridian-hub"]
