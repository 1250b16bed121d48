# Build: docker build -t presenced \
#   --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD) .
# (.dockerignore keeps .git out of the build context, so the commit comes in
# as an argument; `presenced version` prints both.)
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# A static binary: no C library needed at run time.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/presenced/presenced/cli.Version=${VERSION} -X github.com/presenced/presenced/cli.Commit=${COMMIT}" -o /out/presenced .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/presenced /usr/local/bin/presenced
COPY config.yaml /etc/presenced/config.yaml
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/presenced"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
