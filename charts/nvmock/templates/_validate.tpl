{{/*
Checks what the schema cannot: values that are each valid but contradict
one another. Each failure names the field and the fix.
*/}}
{{- define "nvmock.validate" -}}
{{- $builtins := splitList " " (include "nvmock.builtinProfiles" .) -}}
{{- $pools := .Values.pools | default list -}}
{{- if not $pools -}}
{{- fail "pools: empty, so nothing would be deployed; add a pool, e.g. pools: [{name: default, profile: a100}]" -}}
{{- end -}}
{{- $names := dict -}}
{{- range $i, $p := $pools -}}
{{- if not (has $p.profile $builtins) -}}
{{- fail (printf "pools[%d] (%s): profile %q is not a built-in profile; choose one of %s" $i $p.name (toString $p.profile) (join ", " $builtins)) -}}
{{- end -}}
{{- if hasKey $names $p.name -}}
{{- fail (printf "pools[%d]: name %q is already pools[%d]'s; give each pool its own name (it names the pool's DaemonSet and ConfigMap)" $i $p.name (get $names $p.name)) -}}
{{- end -}}
{{- $_ := set $names $p.name $i -}}
{{- end -}}
{{- range $i, $a := $pools -}}
{{- range $j, $b := $pools -}}
{{- if lt $i $j -}}
{{- $sa := $a.nodeSelector | default dict -}}
{{- $sb := $b.nodeSelector | default dict -}}
{{- if eq (toJson $sa) (toJson $sb) -}}
{{- fail (printf "pools[%d] (%s) and pools[%d] (%s) have the same nodeSelector %s, so both would install on the same nodes and overwrite each other's overlay; give each pool a nodeSelector that tells its nodes apart, e.g. {nvmock.io/pool: %s}" $i $a.name $j $b.name (toJson $sa) $b.name) -}}
{{- end -}}
{{- range $pair := list (list $i $a $sa $j $b $sb) (list $j $b $sb $i $a $sa) -}}
{{- $sub := true -}}
{{- range $k, $v := index $pair 2 -}}
{{- if not (and (hasKey (index $pair 5) $k) (eq (toString (get (index $pair 5) $k)) (toString $v))) -}}
{{- $sub = false -}}
{{- end -}}
{{- end -}}
{{- if $sub -}}
{{- fail (printf "pools[%d] (%s): its nodeSelector %s also selects every node of pools[%d] (%s, nodeSelector %s), so two pools would install on those nodes and overwrite each other's overlay; add a label to pools[%d]'s nodeSelector that pools[%d]'s nodes lack" (index $pair 0) (index $pair 1).name (toJson (index $pair 2)) (index $pair 3) (index $pair 4).name (toJson (index $pair 5)) (index $pair 0) (index $pair 3)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* The node paths each become a hostPath mount (review: these passed
the schema and the pod could not start). hostprep checks the rest. */ -}}
{{- $paths := list (list "overlayRoot" .Values.overlayRoot) (list "cdiDir" .Values.cdiDir) (list "nfdDir" .Values.nfdDir) (list "nri.socketPath's directory" (dir .Values.nri.socketPath)) -}}
{{- range $i, $a := $paths -}}
{{- $p := index $a 1 -}}
{{- if regexMatch "(^|/)\\.\\.?(/|$)" $p -}}
{{- fail (printf "%s: %q has a . or .. part, which no hostPath takes; give the path plainly" (index $a 0) $p) -}}
{{- end -}}
{{- range $img := list "/opt/nvmock" "/etc/nvmock" -}}
{{- if or (eq $p $img) (hasPrefix (printf "%s/" $img) $p) (hasPrefix (printf "%s/" $p) $img) -}}
{{- fail (printf "%s: %q would be mounted over the image's %s, where nvmock itself is; give another path" (index $a 0) $p $img) -}}
{{- end -}}
{{- end -}}
{{- range $j, $b := $paths -}}
{{- if and (lt $i $j) (eq $p (index $b 1)) -}}
{{- fail (printf "%s and %s: both are %s; give each its own directory" (index $a 0) (index $b 0) $p) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := .Values.podAnnotations | default dict -}}
{{- if hasPrefix "checksum/" $k -}}
{{- fail (printf "podAnnotations: %s is the chart's own (it rolls the pods when their configuration changes); name yours otherwise" $k) -}}
{{- end -}}
{{- end -}}
{{- $port := .Values.infiniband.peerPort | int -}}
{{- if eq $port 9464 -}}
{{- fail "infiniband.peerPort: 9464 is the plugin's metrics and probe port (--listen :9464); choose another, e.g. 4791" -}}
{{- end -}}
{{- range $i, $p := $pools -}}
{{- /* Only pools with InfiniBand get a fabric Service. */ -}}
{{- if and $port (include "nvmock.hasInfiniband" $p) -}}
{{- $svc := printf "%s-%s-fabric" (include "nvmock.fullname" $) $p.name -}}
{{- if gt (len $svc) 63 -}}
{{- fail (printf "pools[%d].name %q: the pool's fabric Service would be %s, %d characters, and a Service name takes 63 at most; shorten the pool's name or the release's" $i $p.name $svc (len $svc)) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z]" $svc) -}}
{{- fail (printf "release name %q: the pools' fabric Services (%s) would start with a digit, which a Service name cannot; name the release with a letter first" $.Release.Name $svc) -}}
{{- end -}}
{{- end -}}
{{- $slots := hasKey $p "slots" | ternary $p.slots $.Values.infiniband.slots | default dict -}}
{{- if and $p.slots (not (include "nvmock.hasInfiniband" $p)) -}}
{{- fail (printf "pools[%d] (%s).slots: profile %s has no InfiniBand, so its nodes take no fabric slots; leave slots out" $i $p.name (toString $p.profile)) -}}
{{- end -}}
{{- $taken := dict -}}
{{- range $n := keys $slots | sortAlpha -}}
{{- $s := toString (get $slots $n) -}}
{{- if hasKey $taken $s -}}
{{- fail (printf "pools[%d] (%s): nodes %s and %s both take fabric slot %s (%s); each pool is a fabric of its own, numbered from 0: give each pool its own pools[].slots" $i $p.name (get $taken $s) $n $s (ternary "pools[].slots" "infiniband.slots" (hasKey $p "slots"))) -}}
{{- end -}}
{{- $_ := set $taken $s $n -}}
{{- end -}}
{{- end -}}
{{- end -}}
