#include "serving/llm/completion_answer.h"

#include <memory>

#include "serving/http_stream.h"
#include "serving/kserve_protocol.h"

namespace grove::serving::llm {

std::string sse_event(const std::string& payload) { return "data: " + payload + "\n\n"; }

HttpResponse answer_completion(LlmService& service, CompletionRequest request, bool stream,
                               CompletionFormat format) {
  auto answer =
      std::make_shared<HttpStream>(stream ? HttpStream::Mode::kChunked : HttpStream::Mode::kWhole);
  struct Collected {
    std::vector<int64_t> tokens;
    std::string text;
  };
  auto collected = std::make_shared<Collected>();
  auto shared_format = std::make_shared<CompletionFormat>(std::move(format));
  CompletionEvents events;
  events.on_token = [answer, collected, shared_format, stream](int64_t token,
                                                               const std::string& text) {
    const auto index = static_cast<int64_t>(collected->tokens.size());
    collected->tokens.push_back(token);
    if (stream) {
      answer->write(sse_event(json_text(shared_format->token_event(token, text, index))));
    } else {
      collected->text += text;
    }
  };
  events.on_end = [answer, collected, shared_format, stream](const CompletionSummary& summary) {
    if (stream) {
      std::string tail;
      for (const std::string& payload : shared_format->end_events(summary)) {
        tail += sse_event(payload);
      }
      answer->write(std::move(tail));
      answer->close();
    } else {
      answer->answer(
          shared_format->whole(collected->tokens, collected->text + summary.text_rest, summary));
    }
  };
  const LlmService::Ticket ticket = service.submit(std::move(request), std::move(events));
  answer->on_cancel([&service, ticket] { service.cancel(ticket); });
  HttpResponse response;
  response.status = 200;
  response.content_type = stream ? "text/event-stream" : "application/json";
  response.stream = std::move(answer);
  return response;
}

}  // namespace grove::serving::llm
