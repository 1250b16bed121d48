# Build: docker build -t presenced \
#   --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) .
# (.dockerignore keeps .git out of the build context, so the commit comes in
# as an argument; `presenced version` prints both.)
# Without a registry (no Go image to pull): scripts/compose-images builds the
# binary with the local Go toolchain and passes it in as PRESENCED_BINARY,
# with BUILD_IMAGE a Debian image it imports from debootstrap.
ARG BUILD_IMAGE=golang:1.26-bookworm
FROM ${BUILD_IMAGE} AS build
WORKDIR /src
ARG PRESENCED_BINARY=
COPY go.mod go.sum ./
RUN [ -n "$PRESENCED_BINARY" ] || go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# A static binary: no C library needed at run time.
RUN if [ -n "$PRESENCED_BINARY" ]; then install -D -m 0755 "$PRESENCED_BINARY" /out/usr/local/bin/presenced; else CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/presenced/presenced/cli.Version=${VERSION} -X github.com/presenced/presenced/cli.Commit=${COMMIT}" -o /out/usr/local/bin/presenced .; fi
# What the run stage has besides the binary: the CA bundle (Stripe, webhook
# endpoints), a user that is not root, and a /tmp.
RUN mkdir -p /out/etc/ssl/certs /out/tmp && chmod 1777 /out/tmp \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ \
 && echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' > /out/etc/passwd \
 && echo 'nonroot:x:65532:' > /out/etc/group

# Nothing but the above: no shell, no package manager, and no base image to
# pull. No configuration file either: the containers are configured by
# PRESENCED_* variables (docker-compose.yml, the Helm chart) over the
# built-in defaults; mount one and pass --config to use a file.
FROM scratch
COPY --from=build /out/ /
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/presenced"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
