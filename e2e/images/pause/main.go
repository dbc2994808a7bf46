// Command pause is the e2e pod sandbox image's only program: it waits for
// SIGTERM or SIGINT, as the Kubernetes pause container does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
