# Stand-in for golang:<version>-bookworm: a debootstrap bookworm with this
# machine's Go. Context: GOROOT.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
COPY . /usr/local/go
ENV GOPATH=/go GOTOOLCHAIN=local PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
