// LlmService on sim (Note [Completions on the service thread]): completions
// submitted from many threads get the Generator's tokens alone, a cancel
// frees the slot before the next decode step, and a request that can never
// run is refused at once with nothing queued.
#include "serving/llm/llm_service.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "compiler/backends/backend_stats_json.h"
#include "runtime/device.h"
#include "tests/serving/llm/llm_test_util.h"

namespace grove::serving::llm {
namespace {

constexpr uint64_t kSeed = 3883;

std::unique_ptr<Decoder> tiny_decoder() {
  return testing::warmed_tiny_decoder(runtime::kSimDevice, Architecture::kLlama,
                                      runtime::DType::kF32, kSeed, /*max_seq_len=*/48);
}

struct Outcome {
  std::vector<int64_t> tokens;
  CompletionSummary summary;
};

// Submits `request` and returns a future of its tokens and summary.
std::future<Outcome> complete(LlmService& service, CompletionRequest request,
                              LlmService::Ticket* ticket = nullptr) {
  auto promise = std::make_shared<std::promise<Outcome>>();
  auto outcome = std::make_shared<Outcome>();
  CompletionEvents events;
  events.on_token = [outcome](int64_t token, const std::string&) {
    outcome->tokens.push_back(token);
  };
  events.on_end = [promise, outcome](const CompletionSummary& summary) {
    outcome->summary = summary;
    promise->set_value(*outcome);
  };
  std::future<Outcome> future = promise->get_future();
  LlmService::Ticket submitted = service.submit(std::move(request), std::move(events));
  if (ticket) *ticket = submitted;
  return future;
}

CompletionRequest request(std::vector<int64_t> prompt, int64_t max_tokens,
                          SamplingParams sampling = {}) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.ignore_eos = true;
  return r;
}

TEST(LlmService, CompletionsFromManyThreadsGetTheirTokensAlone) {
  auto decoder = tiny_decoder();
  std::vector<CompletionRequest> requests;
  for (int i = 0; i < 7; ++i) {
    SamplingParams sampling;
    if (i % 2 == 1) sampling = {.temperature = 0.8, .top_k = 30, .top_p = 0.95, .seed = 17u + i};
    requests.push_back(request({3 + i, 40 - i, 7, 11 * i % 97}, 5 + i, sampling));
  }
  std::vector<std::vector<int64_t>> alone;
  {
    Generator generator(*decoder);
    for (const CompletionRequest& r : requests) {
      GenerationRequest g;
      g.prompt = r.prompt;
      g.max_new_tokens = r.max_tokens;
      g.ignore_eos = true;
      g.sampling = r.sampling;
      alone.push_back(generator.generate(g));
    }
  }
  // Step by step through the decoder's graphs, and in device loops
  // (Note [Decode runs on the device]): the same tokens.
  for (int64_t loop_steps : {0, 8}) {
    SCOPED_TRACE(::testing::Message() << "decode_loop_steps " << loop_steps);
    const nlohmann::json warm =
        grove::compiler::backends::stats_json(decoder->backend_stats()).at("tree");
    LlmService service(*decoder, nullptr, {.decode_loop_steps = loop_steps});
    std::vector<std::future<Outcome>> futures(requests.size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < requests.size(); ++i) {
      clients.emplace_back([&, i] { futures[i] = complete(service, requests[i]); });
    }
    for (std::thread& client : clients) client.join();
    for (size_t i = 0; i < requests.size(); ++i) {
      Outcome outcome = futures[i].get();
      EXPECT_EQ(outcome.tokens, alone[i]) << "request " << i << " seed " << kSeed;
      EXPECT_EQ(outcome.summary.end, CompletionEnd::kLength);
      EXPECT_EQ(outcome.summary.completion_tokens, requests[i].max_tokens);
      EXPECT_EQ(outcome.summary.prompt_tokens, 4);
    }
    LlmStats stats = service.stats();
    EXPECT_EQ(stats.slots_used, 0);
    EXPECT_EQ(stats.running, 0);
    EXPECT_EQ(stats.ended["length"], 7);
    EXPECT_EQ(stats.slots, 4);
    // The service thread replayed the graphs warm_up() recorded on this thread,
    // and recorded none of its own.
    const nlohmann::json tree =
        grove::compiler::backends::stats_json(decoder->backend_stats()).at("tree");
    EXPECT_EQ(tree.at("recordings"), warm.at("recordings"));
    // Decode steps in device loops replay DecodeLoop's graphs, not the tree's.
    const int64_t tree_decode_steps = loop_steps == 0 ? stats.decode_steps : 0;
    EXPECT_GE(tree.at("replays").get<int64_t>(),
              warm.at("replays").get<int64_t>() + stats.prefills + tree_decode_steps);
    if (loop_steps > 0) {
      EXPECT_GT(stats.loop_launches, 0);
      EXPECT_GT(stats.loop_steps, stats.loop_launches);
    } else {
      EXPECT_EQ(stats.loop_launches, 0);
    }
  }
}

TEST(LlmService, CancelFreesTheSlotBeforeTheNextStep) {
  auto decoder = tiny_decoder();
  LlmService service(*decoder, nullptr, {});
  // The second token's callback holds the service thread until the cancel
  // is in, so the cancel lands between two steps whatever the machine's load.
  std::mutex mutex;
  std::condition_variable changed;
  int tokens = 0;
  bool cancelled = false;
  std::promise<CompletionSummary> ended;
  CompletionEvents events;
  events.on_token = [&](int64_t, const std::string&) {
    std::unique_lock<std::mutex> lock(mutex);
    if (++tokens == 2) {
      changed.notify_all();
      changed.wait(lock, [&] { return cancelled; });
    }
  };
  events.on_end = [&](const CompletionSummary& summary) { ended.set_value(summary); };
  const LlmService::Ticket ticket = service.submit(request({5, 6, 7}, 45), std::move(events));
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return tokens >= 2; });
    service.cancel(ticket);
    cancelled = true;
    changed.notify_all();
  }
  CompletionSummary summary = ended.get_future().get();
  EXPECT_EQ(summary.end, CompletionEnd::kCancelled);
  EXPECT_EQ(summary.completion_tokens, 2);  // no step ran for it after the cancel
  EXPECT_EQ(service.stats().slots_used, 0);
  EXPECT_EQ(service.stats().ended["cancelled"], 1);
  service.cancel(ticket);  // ended: ignored
  Outcome next = complete(service, request({9, 9}, 3)).get();
  EXPECT_EQ(next.tokens.size(), 3u);
  EXPECT_EQ(service.stats().slots_used, 0);
}

TEST(LlmService, RefusesWhatCanNeverRunAndKeepsServing) {
  auto decoder = tiny_decoder();
  LlmService service(*decoder, nullptr, {.max_new_tokens = 40});
  EXPECT_EQ(service.limits().max_prompt_tokens, 16);
  EXPECT_EQ(service.limits().max_new_tokens, 40);
  auto refused = [&](CompletionRequest r, const std::string& words) {
    try {
      service.submit(std::move(r), {});
      ADD_FAILURE() << "accepted a request that should say: " << words;
    } catch (const CompletionError& error) {
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
  };
  refused(request({}, 4), "the prompt is empty");
  refused(request(std::vector<int64_t>(17, 3), 4), "longer than the 16");
  refused(request({1, 2}, 41), "over this server's limit of 40");
  refused(request({1, 2}, 0), "at least 1");
  refused(request(std::vector<int64_t>(16, 3), 40), "cache positions");  // 55 > 48
  refused(request({1, 97}, 2), "outside the model's vocabulary");
  refused(request({1, 2}, 2, {.temperature = -1}), "temperature");
  CompletionRequest stop = request({1, 2}, 2);
  stop.stop = {"\n"};
  refused(stop, "stop strings need a tokenizer");
  EXPECT_THROW(service.encode("text"), CompletionError);
  Outcome outcome = complete(service, request({1, 2}, 20)).get();
  EXPECT_EQ(outcome.tokens.size(), 20u);
  EXPECT_EQ(service.stats().ended.count("failed"), 0u);
}

// Note [Completions on the service thread]: a request ends exactly once, with
// on_end, even one still in the inbox when the service stops. Requests are
// submitted from inside a token callback (the service thread is in a step, so
// none of them can be admitted) until submit says the service is stopping;
// before, shutdown dropped them with no end, and an HTTP client's stream of
// one would never be answered.
TEST(LlmService, ShutdownEndsEveryRequestOnceEvenThoseNotYetAdmitted) {
  auto decoder = tiny_decoder();
  LlmService service(*decoder, nullptr, {.max_waiting = size_t{1} << 20});
  std::mutex mutex;
  std::map<LlmService::Ticket, int> ends;  // ticket -> on_end calls
  std::map<LlmService::Ticket, CompletionSummary> summaries;
  auto counted = [&](LlmService::Ticket* ticket) {
    CompletionEvents events;
    events.on_end = [&, ticket](const CompletionSummary& summary) {
      std::lock_guard<std::mutex> lock(mutex);
      ++ends[*ticket];
      summaries[*ticket] = summary;
    };
    return events;
  };
  LlmService::Ticket running_ticket = 0;
  std::list<LlmService::Ticket> tickets;  // the service thread's submits
  std::promise<void> in_a_step;
  bool first = true;
  CompletionEvents running = counted(&running_ticket);
  running.on_token = [&](int64_t, const std::string&) {
    if (!first) return;
    first = false;
    auto submit_one = [&] {
      LlmService::Ticket* ticket = &tickets.emplace_back(0);
      *ticket = service.submit(request({4, 5, 6}, 3), counted(ticket));
    };
    submit_one();  // in the inbox while this step runs
    in_a_step.set_value();
    while (true) {
      try {
        submit_one();
      } catch (const CompletionUnavailable& error) {
        EXPECT_NE(std::string(error.what()).find("stopping"), std::string::npos) << error.what();
        tickets.pop_back();
        break;
      }
    }
  };
  running_ticket = service.submit(request({1, 2, 3}, 40), std::move(running));
  in_a_step.get_future().wait();
  service.shutdown();
  ASSERT_GE(tickets.size(), 1u);
  tickets.push_back(running_ticket);
  std::lock_guard<std::mutex> lock(mutex);
  for (LlmService::Ticket ticket : tickets) {
    EXPECT_EQ(ends[ticket], 1) << "ticket " << ticket << " of " << tickets.size();
    EXPECT_EQ(summaries[ticket].end, CompletionEnd::kCancelled) << "ticket " << ticket;
  }
  EXPECT_EQ(summaries[tickets.front()].prompt_tokens, 3);
  EXPECT_EQ(service.stats().ended.at("cancelled"), static_cast<int64_t>(tickets.size()));
}

}  // namespace
}  // namespace grove::serving::llm
