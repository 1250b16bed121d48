# Build: docker build -t presenced .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# A static binary: no C library needed at run time.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/presenced .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/presenced /usr/local/bin/presenced
COPY config.yaml /etc/presenced/config.yaml
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/presenced"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
