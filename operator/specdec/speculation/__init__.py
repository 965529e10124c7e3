"""What speculation costs and gains, from numbers only (pure): what the pods' counters mean and which draft
length pays at one sequence (payoff), whether the pods still draft (guard), the step time under load and the
draft lengths by load (load_model), and TensorRT-LLM's draft_len_schedule made from them (trtllm_schedule).
Imported by the operator's feedback loop, its builders and status, the runtime pods' process and the simulators
alike."""
