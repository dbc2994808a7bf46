package nri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// A 410 that answers the watch request itself (rather than arriving as an
// event in the stream, as kube-apiserver sends it) ends the watch too, so
// that the caller lists again; client-go's RetryWatcher alone would ask
// again forever from the same expired version. The API server tests are in
// namespaces_kube_test.go.
func TestAWatchRequestAnswered410EndsTheWatch(t *testing.T) {
	ns := &watchOnly{errs: []error{apierrors.NewResourceExpired("too old resource version: 5 (9)")}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var outcomes []error
	err := watchOptedIn(ctx, ns, DefaultNamespaceLabel, "5", time.Second,
		func(string, bool) { t.Error("an update from a failed watch") },
		func(err error) { outcomes = append(outcomes, err) })
	if !errors.Is(err, errWatchExpired) || !strings.Contains(err.Error(), "too old resource version: 5 (9)") {
		t.Errorf("error %v, want errWatchExpired quoting the API server", err)
	}
	if ns.calls != 1 || len(outcomes) != 0 {
		t.Errorf("%d watch requests, outcomes %v; want one, reported to nobody (a 410 is no failure)", ns.calls, outcomes)
	}
}

// A watch refused (403: an API server that is starting answers so until
// its RBAC cache is filled) is reported and retried, where the RetryWatcher
// alone would end the watch.
func TestARefusedWatchIsRetried(t *testing.T) {
	ns := &watchOnly{errs: []error{apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "", errors.New("RBAC: clusterrole not found")), nil}}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var outcomes []string
	updated := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- watchOptedIn(ctx, ns, DefaultNamespaceLabel, "5", 10*time.Millisecond,
			func(name string, in bool) { updated <- fmt.Sprintf("%s %v", name, in) },
			func(err error) { outcomes = append(outcomes, fmt.Sprint(err)) })
	}()
	select {
	case u := <-updated:
		if u != "ml true" {
			t.Errorf("update %q, want ml true", u)
		}
	case err := <-done:
		t.Fatalf("the watch ended: %v", err)
	case <-ctx.Done():
		t.Fatal("no update after the refusal")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
	if len(outcomes) != 2 || !strings.Contains(outcomes[0], "forbidden") || outcomes[1] != "<nil>" {
		t.Errorf("outcomes %q, want the refusal, then a watch that started", outcomes)
	}
}

// watchOnly is a namespace client whose Watch answers errs in turn, and
// after a nil one a watch with one namespace, ml; it has no other method.
type watchOnly struct {
	corev1client.NamespaceInterface
	errs  []error
	calls int
}

func (w *watchOnly) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	w.calls++
	err := w.errs[min(w.calls, len(w.errs))-1]
	if err != nil {
		return nil, err
	}
	fw := watch.NewFakeWithChanSize(1, false)
	fw.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", ResourceVersion: "6"}})
	return fw, nil
}

func TestNamespaceLabelMustBeKeyEqualsValue(t *testing.T) {
	for _, tc := range []struct{ label, err string }{
		{"nvmock.io/inject=enabled", ""},
		{"gpu=", ""},
		{"example.com/team-a.gpu=on_1", ""},
		{"nvmock.io/inject", "want KEY=VALUE"},
		{"=enabled", "is not a label name"},
		{"Bad_Prefix!/x=y", "not a DNS subdomain"},
		{"a=b c", "is not a label value"},
		{"-a=b", "is not a label name"},
		{strings.Repeat("k", 63) + "=" + strings.Repeat("v", 63), ""},
		{strings.Repeat("k", 64) + "=v", "is not a label name"},
		{"k=" + strings.Repeat("v", 64), "is not a label value"},
		{strings.Repeat("p", 253) + "/k=v", ""},
		{strings.Repeat("p", 254) + "/k=v", "not a DNS subdomain"},
	} {
		err := ValidateNamespaceLabel(tc.label)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want one saying %q", tc.label, err, tc.err)
		}
	}
	if _, err := New(Options{NamespaceLabel: "no-equals", OverlayRoot: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "want KEY=VALUE") {
		t.Errorf("New with a bad label: %v", err)
	}
}
