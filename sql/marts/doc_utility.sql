select
    doc_path,
    count(*)::bigint as times_retrieved,
    count_if(hit)::bigint as times_committed,
    count_if(hit)::double / count(*) as hit_rate
from marts.retrieval_judgements
group by doc_path
having count(*) >= 2
order by hit_rate desc, times_retrieved desc, doc_path
