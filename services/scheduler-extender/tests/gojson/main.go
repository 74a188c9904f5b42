// Go's encoding of the extender reply types, for the wire tests.
//
// Reads JSON lines {"type": "<k8s.io/kube-scheduler/extender/v1 type>", "body": "<JSON text>"}
// on stdin; decodes each body into that type as kube-scheduler does (encoding/json, keys
// matched case-insensitively) and writes json.Marshal of the value as one JSON string per line.
// The types mirror k8s.io/kube-scheduler/extender/v1 field for field; the embedded Kubernetes
// objects (*v1.Pod, *v1.NodeList) are json.RawMessage, which Go re-emits compacted and
// HTML-escaped, as it would any value.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

type HostPriority struct {
	Host  string
	Score int64
}

type HostPriorityList []HostPriority

type FailedNodesMap map[string]string

type ExtenderFilterResult struct {
	Nodes                      *json.RawMessage
	NodeNames                  *[]string
	FailedNodes                FailedNodesMap
	FailedAndUnresolvableNodes FailedNodesMap
	Error                      string
}

type MetaPod struct {
	UID string
}

type MetaVictims struct {
	Pods             []*MetaPod
	NumPDBViolations int64
}

type Victims struct {
	Pods             []*json.RawMessage
	NumPDBViolations int64
}

type ExtenderPreemptionResult struct {
	NodeNameToMetaVictims map[string]*MetaVictims
}

type ExtenderPreemptionArgs struct {
	Pod                   *json.RawMessage
	NodeNameToVictims     map[string]*Victims
	NodeNameToMetaVictims map[string]*MetaVictims
}

type ExtenderArgs struct {
	Pod       *json.RawMessage
	Nodes     *json.RawMessage
	NodeNames *[]string
}

type ExtenderBindingArgs struct {
	PodName      string
	PodNamespace string
	PodUID       string
	Node         string
}

type ExtenderBindingResult struct {
	Error string
}

func value(kind string) (interface{}, error) {
	switch kind {
	case "HostPriorityList":
		return &HostPriorityList{}, nil
	case "ExtenderFilterResult":
		return &ExtenderFilterResult{}, nil
	case "ExtenderPreemptionResult":
		return &ExtenderPreemptionResult{}, nil
	case "ExtenderPreemptionArgs":
		return &ExtenderPreemptionArgs{}, nil
	case "ExtenderArgs":
		return &ExtenderArgs{}, nil
	case "ExtenderBindingArgs":
		return &ExtenderBindingArgs{}, nil
	case "ExtenderBindingResult":
		return &ExtenderBindingResult{}, nil
	}
	return nil, fmt.Errorf("unknown type %q", kind)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<28)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		var req struct {
			Type string `json:"type"`
			Body string `json:"body"`
		}
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		v, err := value(req.Type)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := json.Unmarshal([]byte(req.Body), v); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", req.Type, err)
			os.Exit(2)
		}
		encoded, err := json.Marshal(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		line, _ := json.Marshal(string(encoded))
		out.Write(line)
		out.WriteByte('\n')
	}
}
